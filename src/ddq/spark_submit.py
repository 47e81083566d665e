"""The script `spark-submit` runs: downpour training, with `ddq train`'s flags.

`ddq package DIR` writes it as DIR/ddq_submit.py beside DIR/ddq.zip (the
package, for `--py-files`). The cluster's master comes from spark-submit's
`--master`; executors need Python with ddq's dependencies (torch, numpy,
gymnasium, redis), which `spark.pyspark.python` can point at.
"""

import sys

from ddq.cli import main

if __name__ == "__main__":
    sys.exit(main(["train", "--mode", "downpour", *sys.argv[1:]]))
