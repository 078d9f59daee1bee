import sys
from pathlib import Path

# the helpers beside these tests (synthetic_bench) import by name
sys.path.insert(0, str(Path(__file__).resolve().parent))
