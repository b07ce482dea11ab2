"""``python -m aiowheel.spark COMMAND``: the Spark commands without the ``aiowheel`` entry point.

Also the driver file to hand ``spark-submit`` (see docs/spark.md).
"""

from aiowheel.spark.cli import main

raise SystemExit(main())
