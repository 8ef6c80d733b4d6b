import os
import sys

# The tests exercise this tree's package and library (make test-python), installed or not.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
