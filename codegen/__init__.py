"""kraft's code generator: Kafka JSON message schemas -> Python/Cython message classes.

Not installed with the package; run from the repository root::

    python -m codegen --schemas ../shared/kafka-schemas          # rewrite the generated files
    python -m codegen --check                                    # exit 1 if any file is stale

``generate(root)`` returns ``{repo-relative path: source text}`` so the test
suite can regenerate in memory and diff against the committed files.
"""
from .targets import generate, default_schemas_dir, REPO_ROOT  # noqa: F401
