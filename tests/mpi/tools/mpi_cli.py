"""What the autoddl-train command-line tests share: running the program under mpirun and
reporting checks (one line each; the failures are kept for the exit code)."""
import os
import subprocess


class cli_test:
    def __init__(self, mpirun, program):
        self.base = [mpirun, "--allow-run-as-root", "--oversubscribe"]
        self.program = os.path.abspath(program) if os.path.exists(program) else program  # (runs from any folder)
        self.failures = []

    def run(self, np, *args, timeout=240, cwd=None):
        return subprocess.run(self.base + ["-np", str(np), self.program, *args], capture_output=True, text=True,
                              timeout=timeout, cwd=cwd)

    def check(self, what, ok, detail=""):
        print(("ok   " if ok else "FAIL ") + what + ("" if ok else ": " + detail))
        if not ok:
            self.failures.append(what)
