"""Command-line tools that need no PyTorch (run them by module or by path):

    python -m torchtpu.tools.plugin_check [PATH]   # what a PJRT plugin offers
"""
