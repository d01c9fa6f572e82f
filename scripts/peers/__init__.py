"""The peers (docs/peers.md): python3 -m scripts.peers.peers, scripts.peers.fa4, scripts.peers.torch_sdpa, ..."""
