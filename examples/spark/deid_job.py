"""Entry point for ``spark-submit``: takes the options of ``hybriddeid spark-deid`` (see README.md here).

    spark-submit examples/spark/deid_job.py --model es --input notes/ --output deid/ --mode tag
"""
import sys

from hybriddeid.integrations.spark_submit import main

if __name__ == "__main__":
    sys.exit(main())
