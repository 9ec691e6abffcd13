"""Builds ``mysqlcdc_rowcodec``, a top-level extension module (Spark executors import the provider
from a zip of sources, where an extension inside the package could not load)."""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(ext_modules=cythonize([Extension("mysqlcdc_rowcodec", ["mysqlcdc_rowcodec.pyx"], extra_compile_args=["-O2"])],
                            language_level=3))
