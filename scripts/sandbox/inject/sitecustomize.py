"""Loaded by Python at start-up when scalescope launches a sandbox program
(scripts/sandbox/run_program.py puts this folder first on PYTHONPATH and sets
SCALESCOPE_SANDBOX=1): torch.distributed's process groups become the scalescope backend
(scripts/sandbox/scalescope_pg.py) whatever backend the program names, with no code change."""
import os

if os.environ.get("SCALESCOPE_SANDBOX") == "1":
    import sys
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import scalescope_pg
    scalescope_pg.install()
    scalescope_pg.start_op_recording()
