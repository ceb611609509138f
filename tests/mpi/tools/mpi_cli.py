"""What the autoddl-train command-line tests share: running the program under mpirun and
reporting checks (one line each; the failures are kept for the exit code)."""
import subprocess


class cli_test:
    def __init__(self, mpirun, program):
        self.base = [mpirun, "--allow-run-as-root", "--oversubscribe"]
        self.program = program
        self.failures = []

    def run(self, np, *args, timeout=240):
        return subprocess.run(self.base + ["-np", str(np), self.program, *args], capture_output=True, text=True,
                              timeout=timeout)

    def check(self, what, ok, detail=""):
        print(("ok   " if ok else "FAIL ") + what + ("" if ok else ": " + detail))
        if not ok:
            self.failures.append(what)
