import sys

from kfchaos.cli import main

sys.exit(main())
