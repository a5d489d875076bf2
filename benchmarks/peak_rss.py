"""Run a module (or -c CODE) as __main__ and write this process's peak RSS in KiB to OUT at exit.

    python -m benchmarks.peak_rss OUT MODULE [ARGS...]      |      ... OUT -c CODE

VmHWM belongs to the process image, so it starts afresh at exec: unlike wait4()'s ru_maxrss,
it does not inherit the high-water mark of the (possibly large) parent that forked the child.
"""
import atexit
import runpy
import sys


def _write_peak(path: str) -> None:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                with open(path, "w") as out:
                    out.write(line.split()[1])
                return


def main() -> None:
    out, target, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
    atexit.register(_write_peak, out)
    if target == "-c":
        sys.argv = ["-c"] + rest[1:]
        exec(compile(rest[0], "<peak_rss>", "exec"), {"__name__": "__main__"})
    else:
        sys.argv = [target] + rest
        runpy.run_module(target, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
