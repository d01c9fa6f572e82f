#!/usr/bin/env python3
"""The README's section "Against FlashAttention-3 and cuDNN": scripts/grid_summary.py fa3.

  python3 scripts/fa3_grid_summary.py results/h200/fa3_grid.json results/h200/fa3_grid.peers.json
"""
import sys

import grid_summary

if __name__ == "__main__":
    sys.exit(grid_summary.main(grid="fa3"))
