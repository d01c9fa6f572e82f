#!/usr/bin/env python3
"""The README's FlashAttention-2 grid tables ("Results on the H200"): scripts/grid_summary.py fa2.

  python3 scripts/fa2_grid_summary.py results/h200/fa2_grid.json results/h200/fa2_grid.torch_sdpa.json
"""
import sys

import grid_summary

if __name__ == "__main__":
    sys.exit(grid_summary.main(grid="fa2"))
