"""Helpers shared by the tests (no tests here), one module per layer they serve: ``raft``
(cluster configs, free ports), ``server`` (a cleanly stopped node, directory snapshots, the
CLIs), ``cluster`` (multi-process nodes and their acknowledged writes), ``pki`` (test
certificates), ``messages`` (hypothesis strategies, the fixture record walker).  pytest puts
``tests/`` on ``sys.path`` (``tests/conftest.py`` lives there), so tests import ``support.*``."""
