"""Loaded by Python at start-up when scalescope launches a sandbox program
(scripts/sandbox/run_program.py puts this folder first on PYTHONPATH and sets
SCALESCOPE_SANDBOX=1): torch.distributed's process groups become the scalescope backend
(scripts/sandbox/scalescope_pg.py) whatever backend the program names, with no code change."""
import os

if os.environ.pop("SCALESCOPE_SANDBOX", None) == "1":  # this process only, not its children
    import sys
    try:
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        import scalescope_pg
        scalescope_pg.install()
        import torch
        if not torch.cuda.is_available():  # a program written for CUDA runs on the CPU here
            scalescope_pg.run_cuda_on_cpu()
        scalescope_pg.start_op_recording()
    except Exception as e:  # noqa: BLE001  (else Python would go on with the real backends)
        sys.stderr.write(f"scalescope: error: the sandbox could not be installed in "
                         f"{sys.executable} ({type(e).__name__}: {e}): it needs PyTorch 2.x\n")
        sys.stderr.flush()
        os._exit(97)
