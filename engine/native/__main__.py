"""``python -m engine.native``: build the engine's C optimiser."""
import sys

from engine.native import main

sys.exit(main())
