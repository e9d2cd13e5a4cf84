"""The context layer: OKF bundles, the IR read from them, and the deterministic validator.

It never imports a model framework (``agent_framework``) or ``mcp``: the same bundles and the same
checks serve any agent stack, and ``tests/test_layers.py`` holds that line, with the layers' order.
"""
