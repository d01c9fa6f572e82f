#!/usr/bin/env python3
"""Several peers in one process and one results file: each case's inputs, float64 reference and
naive baseline are made once for all of them (docs/peers.md).

    python3 scripts/peers/peers.py CONFIG.json --peers fa4,torch_sdpa [--backend flash,cudnn] [--out FILE]
    python3 scripts/peers/peers.py CONFIG.json --peers fa4,torch_sdpa,attnbench --impl cuda.cudnn_sdpa --dry-run

--peers: fa4 (fa4.py), torch_sdpa (torch_sdpa.py), flex (flex.py), flashinfer (flashinfer.py: paged
cases only), attnbench (attnbench_impls.py); default fa4,torch_sdpa,flex (flex has rows only for
cases with a window or a soft cap unless --flex-dense). Every other flag is the one of the peer it belongs to, or common (common.py).
"""
import os
import sys

if not __package__:  # run as a file: the repository root on the path, for the `scripts` package
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from scripts.entry import run  # noqa: E402
from scripts.peers import attnbench_impls, common, fa4, flashinfer, flex, torch_sdpa  # noqa: E402

PEERS = {"fa4": fa4, "torch_sdpa": torch_sdpa, "flex": flex, "flashinfer": flashinfer, "attnbench": attnbench_impls}
DEFAULT = ["fa4", "torch_sdpa", "flex"]


def main(argv):
    picked, rest, i = list(DEFAULT), [], 0
    while i < len(argv):
        a = argv[i]
        if a == "--peers" and i + 1 < len(argv):
            picked, i = argv[i + 1], i + 2
        elif a.startswith("--peers="):
            picked, i = a.split("=", 1)[1], i + 1
        else:
            rest.append(a)
            i += 1
            continue
        try:
            picked = common.split_list([picked], PEERS, "--peers")
        except common.BadInput as e:
            common.die("peers.py", str(e))
    mods = [PEERS[p] for p in picked]
    # The other peers' flags are still accepted (and ignored), so one command line serves any --peers.
    ignored = [m for m in PEERS.values() if m not in mods]

    class Quiet:
        def __init__(self, m):
            self.name, self.add_args = m.name, m.add_args

        def backends(self, args, kind):
            return []

    class PeersFlag:  # for --help only: --peers is read above
        name = "peers"

        @staticmethod
        def add_args(ap):
            ap.add_argument("--peers", help="fa4, torch_sdpa, flex, flashinfer, attnbench; comma-separated (default "
                                            + ",".join(DEFAULT) + ")")

        @staticmethod
        def backends(args, kind):
            return []

    return common.main("peers.py", __doc__.split("\n\n")[0], mods + [Quiet(m) for m in ignored] + [PeersFlag],
                       rest, peer_name="+".join(picked))


if __name__ == "__main__":
    run(main, sys.argv[1:])
