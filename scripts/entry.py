"""The entry point every script shares: run(main) is sys.exit(main()), except that a reader that
goes away (`python3 -m scripts.peers.peers CONFIG --dry-run | head`) ends the script quietly, as it
would a C tool killed by SIGPIPE, instead of with a BrokenPipeError traceback.

Python ignores SIGPIPE, so a write to a closed pipe raises BrokenPipeError; restoring the default
action instead would kill a script in the middle of anything, such as an atomic results write. Here
the error unwinds normally (finally blocks and temporary files are cleaned up), and the exit code is
128 + SIGPIPE = 141, what a shell reports for a process killed by SIGPIPE. A BrokenPipeError from
any other pipe (a child process's) is not this case and is raised as usual.
"""
import os
import select
import signal
import sys


def _stdout_closed():
    """Whether the reader of stdout has gone (poll reports an error on a pipe with no reader)."""
    try:
        p = select.poll()
        p.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in p.poll(0))
    except (AttributeError, OSError, ValueError):
        return False


def run(main, *args, **kwargs):
    """sys.exit(main(*args, **kwargs)); a closed stdout exits quietly with 141."""
    try:
        try:
            rc = main(*args, **kwargs)
        finally:
            sys.stdout.flush()  # the buffered rest is written here, or at exit, where it would raise
    except BrokenPipeError:
        if not _stdout_closed():
            raise
        # Python flushes stdout once more at exit: give it somewhere to go.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(128 + signal.SIGPIPE)
    sys.exit(rc)
