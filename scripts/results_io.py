"""Reading and writing attnbench results files (docs/results_schema.md) from the Python tools.

    from results_io import load_results, write_atomic

load_results(path, fail, what="") returns the parsed file, or calls fail(message) (which must not
return: the tools print it and exit 2) when the file cannot be opened, is not JSON, or is not an
attnbench results file with a "rows" array. write_atomic(path, obj) writes JSON through a
temporary file in the same folder and a rename, so a reader never sees half a file; NaN and
infinities are written as null, as attnbench writes them.
"""
import json
import math
import os
import tempfile

SCHEMA = "attnbench.results/1"


def load_results(path, fail, what=""):
    where = f"{what} {path}".strip()
    try:
        with open(path, encoding="utf-8") as f:
            res = json.load(f)
    except OSError as e:
        fail(f"{where}: cannot open the file: {e.strerror}")
    except json.JSONDecodeError as e:
        fail(f"{where}: not valid JSON: {e}")
    if not isinstance(res, dict) or res.get("schema") != SCHEMA or not isinstance(res.get("rows"), list):
        fail(f'{where}: not an attnbench results file (expected "schema": "{SCHEMA}" and "rows")')
    return res


def finite(obj):
    """obj with every NaN or infinite float as None: JSON has neither (attnbench writes null)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def write_atomic(path, obj):
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
