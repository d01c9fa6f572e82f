"""Reading and writing attnbench results files (docs/results_schema.md) from the Python tools.

    from results_io import load_results, write_atomic

load_results(path, fail, what="") returns the parsed file (read through gzip when the path ends in
.gz, as the archived job files under results/h200/*/ are), or calls fail(message) (which must not
return: the tools print it and exit 2) when the file cannot be opened, is not JSON, or is not an
attnbench results file with a "rows" array. It reads the schema's earlier version as attnbench's
reader does: a row's "params" (the former name of "options") comes back as "options", so the
tools read r["options"] whatever the file's age (a row with both is refused). Former
implementation names are not mapped here: attnbench's own reader (table, compare) maps them
through the registry. write_atomic(path, obj) writes JSON through a
temporary file in the same folder and a rename, so a reader never sees half a file; NaN and
infinities are written as null, as attnbench writes them.

An output never destroys anything (as attnbench's --out, harness/include/attnbench/output_file.hpp):
output_refusal(path, inputs, names) says why a path must not be written (a device, FIFO, socket,
directory, read-only file, or one of the inputs: same device and inode, or the same resolved
path), and write_atomic refuses the first four itself. OutputLock(path, command) holds an
exclusive flock on "<path>.lock" (the one attnbench run takes, so a peer and a run exclude each
other too) and raises OutputBusy naming the holder.
"""
import datetime
import fcntl
import gzip
import json
import math
import os
import socket
import stat
import sys
import tempfile

SCHEMA = "attnbench.results/2"  # what is written: rows carry "options"
SCHEMAS = (SCHEMA, "attnbench.results/1")  # what is read: version 1 rows carry "params"


def load_results(path, fail, what=""):
    where = f"{what} {path}".strip()
    try:
        # The archived job files under results/h200/*/ are gzipped (a device call carries the whole
        # tree, at most 64 MiB): "X.json.gz" reads as X.json.
        opener = gzip.open if str(path).endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as f:
            res = json.load(f)
    except (OSError, EOFError) as e:
        fail(f"{where}: cannot open the file: {getattr(e, 'strerror', None) or e}")
    except json.JSONDecodeError as e:
        fail(f"{where}: not valid JSON: {e}")
    if not isinstance(res, dict) or res.get("schema") not in SCHEMAS or not isinstance(res.get("rows"), list):
        fail(f'{where}: not an attnbench results file (expected "schema": "{SCHEMA}" or "{SCHEMAS[1]}", '
             'and "rows")')
    for i, r in enumerate(res["rows"]):
        if isinstance(r, dict) and "params" in r:
            if "options" in r:
                fail(f'{where}: rows[{i}]: both "options" and "params" (its former name): a row has one')
            r["options"] = r.pop("params")
    return res


def read_tbps_at(ceilings, nbytes):
    """The rate (TB/s) of a read of nbytes from ceilings["read_curve"] (harness/src/run/ceilings.cpp's
    read_tbps_at, the same rule): a call's time linear in its bytes between the two curve points
    around nbytes (beyond the ends, along the nearest segment), the rate bytes over that time.
    None without a usable curve or for nbytes <= 0."""
    curve = ceilings.get("read_curve") if isinstance(ceilings, dict) else None
    if not isinstance(curve, list) or not nbytes or nbytes <= 0:
        return None
    pts = sorted((p["bytes"], p["bytes"] / (p["tbps"] * 1e12)) for p in curve
                 if isinstance(p, dict) and isinstance(p.get("bytes"), (int, float))
                 and isinstance(p.get("tbps"), (int, float)) and p["bytes"] > 0 and p["tbps"] > 0)
    if not pts:
        return None
    if len(pts) == 1:
        secs = pts[0][1] * nbytes / pts[0][0]
    else:
        i = 0
        while i + 2 < len(pts) and nbytes > pts[i + 1][0]:
            i += 1
        (b0, t0), (b1, t1) = pts[i], pts[i + 1]
        secs = t0 + (nbytes - b0) * (t1 - t0) / (b1 - b0) if b1 > b0 else t0
    return nbytes / secs / 1e12 if secs > 0 else None


def finite(obj):
    """obj with every NaN or infinite float as None: JSON has neither (attnbench writes null)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def resolved_output_path(path):
    """path with the symlinks of its last component followed: a write replaces the link's target."""
    for _ in range(40):
        if not os.path.islink(path):
            break
        target = os.readlink(path)
        path = target if os.path.isabs(target) else os.path.join(os.path.dirname(path), target)
    return path


def _kind(mode):
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def output_refusal(path, inputs=(), names=()):
    """Why path must not be written as an output ("" when it may): as attnbench's output_refusal."""
    target = resolved_output_path(path)
    try:
        st = os.stat(target)
    except OSError:
        st = None
    if st is not None:
        if not stat.S_ISREG(st.st_mode):
            return f"is {_kind(st.st_mode)}, not a results file: refused (a write replaces it)"
        # Mode bits, not os.access: root may write anything, but a read-only file was meant to stay.
        if not st.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) or not os.access(target, os.W_OK):
            return "is read-only: refused (make it writable, or choose another --out)"
    for i, inp in enumerate(inputs):
        if not inp:
            continue
        name = names[i] if i < len(names) else "an input of this run"
        try:
            si = os.stat(inp)
        except OSError:
            si = None
        if st is not None and si is not None:
            same = (si.st_dev, si.st_ino) == (st.st_dev, st.st_ino)
        else:
            same = os.path.realpath(target) == os.path.realpath(inp)
        if same:
            return f"is {name} ({inp}): refused (the results would replace it)"
    return ""


class OutputBusy(Exception):
    pass


class OutputLock:
    """An exclusive lock on an output while the object lives (or until release()): flock on
    "<path>.lock", holding pid, host, start time and command; removed on release."""

    def __init__(self, path, command=""):
        self.path = resolved_output_path(path) + ".lock"
        d = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(d, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 512, 0).decode("utf-8", "replace").strip("\n\0")
                os.close(fd)
                raise OutputBusy(f"is being written by another run: {holder or 'holder not known yet (it is starting)'}"
                                 f" (lock {self.path})") from None
            # The previous holder unlinks the file on release: a lock on an unlinked file is no lock.
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except OSError:
                same = False
            if same:
                self.fd = fd
                break
            os.close(fd)
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        text = f"pid {os.getpid()} on {socket.gethostname()}, started {now}" + (f": {command}" if command else "")
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, (text + "\n").encode(), 0)

    def release(self):
        if getattr(self, "fd", None) is None:
            return
        try:
            os.unlink(self.path)
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None

    def __del__(self):
        self.release()


def emit_report(text, out=None):
    """A tool's markdown report: to stdout, and to the file out (when given) with the same text."""
    sys.stdout.write(text)
    if out:
        with open(out, "w", encoding="utf-8") as f:
            f.write(text)


def write_atomic(path, obj):
    why = output_refusal(path)
    if why:
        raise OSError(f"{path} {why}")
    path = resolved_output_path(path)
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".results_io.", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(finite(obj), f, indent=1, allow_nan=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp's 0600: results are ordinary files
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
