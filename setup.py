"""The package's build. It is pure Python, but for a wheel built with ``DSMLKIT_COMPILE=1``:
then the read and render modules of :data:`COMPILED` are compiled by mypyc too (a wheel for one
CPython version and platform, the ``.py`` files beside the extensions). The build backend
(``_build/dsmlkit_build.py``) decides that and says so in ``_DSMLKIT_SETUP_COMPILES``.
"""

import os

from setuptools import setup

#: The modules of a cold request's read and render: mypy-strict, and about a third faster
#: compiled (docs/rendering.md, "The compiled build").
COMPILED = [
    "src/dsmlkit/render/builder.py",
    "src/dsmlkit/conversation/model.py",
    "src/dsmlkit/conversation/normalize.py",
    "src/dsmlkit/conversation/readers.py",
    "src/dsmlkit/render/renderer.py",
]

if os.environ.get("_DSMLKIT_SETUP_COMPILES") == "1":
    from mypyc.build import mypycify

    setup(ext_modules=mypycify(COMPILED, opt_level="3", group_name="dsmlkit"))
else:
    setup()
