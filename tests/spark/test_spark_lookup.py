"""spark.read.format("kraft") works without register(spark): Spark 4 finds pyspark_kraft."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from conftest import REPO, require_fixtures

from kraft_storage.record import decode_records


def test_format_kraft_is_found_without_register(tmp_path):
    seg = next(require_fixtures().glob("*/__cluster_metadata-0/00000000000000000000.log"))
    expect = len(decode_records(seg.read_bytes()))
    script = textwrap.dedent(f"""
        from pyspark.sql import SparkSession
        s = (SparkSession.builder.master("local[1]").appName("kraft-lookup")
             .config("spark.ui.enabled", "false").config("spark.driver.memory", "512m").getOrCreate())
        s.sparkContext.setLogLevel("ERROR")
        print("COUNT", s.read.format("kraft").load({str(seg)!r}).count())
        s.stop()
    """)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"COUNT {expect}" in out.stdout.splitlines()
