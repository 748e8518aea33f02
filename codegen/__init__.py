"""kraft's code generator: Kafka JSON message schemas -> Python/Cython message classes.

Not installed with the package; run from the repository root::

    python -m codegen --schemas ../shared/kafka-schemas          # rewrite the generated files
    python -m codegen --check                                    # exit 1 if any file is stale
    python -m codegen --out /tmp/gen                             # write every target under /tmp/gen

``generate(root)`` returns ``{repo-relative path: source text}`` so the test
suite can regenerate in memory and diff against the committed files
(``tests/project/test_codegen.py``); ``targets.py`` says which schemas go into which file.

Templates: code that is copied into a generated module rather than computed
from the schemas lives in ``codegen/templates/``, one file per generated module,
named after it (``_metadata_columns.py.tmpl`` -> ``kraft_storage/_pure/_metadata_columns.py``,
``_metadata_columns.pyx.tmpl`` -> ``kraft_storage/_native/_metadata_columns.pyx``).
A template is the module's text with ``${name}`` placeholders (``string.Template``;
``$$`` is a literal ``$``) for the generated parts; ``columns.render_template``
fills them and refuses a placeholder without a value or a value without a
placeholder.  After editing a template, run ``python -m codegen`` and commit the
template with the regenerated files (rebuild the native extensions for ``.pyx``
changes); ``python -m codegen --check`` and ``tests/project/test_codegen.py`` fail while
they disagree.
"""
from .targets import REPO_ROOT, default_schemas_dir, generate  # noqa: F401
