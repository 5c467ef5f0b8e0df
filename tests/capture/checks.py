"""What the capture test scripts share: a check that prints and records, running scalescope,
and the exit."""
import subprocess
import sys

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def runner(scalescope):
    """sh(*args): scalescope with `args`, its output captured."""
    return lambda *args: subprocess.run([scalescope, *args], capture_output=True, text=True)


def finish(message):
    if failures:
        print(f"{len(failures)} FAILED")
        sys.exit(1)
    print(message)
