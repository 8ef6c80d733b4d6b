# Written by setup.py at install time: the build/ directory of the tree the package came from.
BUILD_DIR = None
