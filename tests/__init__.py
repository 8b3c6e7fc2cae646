"""The test suite (``make test``): unit tests, the kernel contract suite (``test_kernel_contract.py``), checks of
the kernels against naive references, the docs' generated tables and links (``test_docs.py``), and the
subpackages below; shared fixtures (a real broker and Redis, the corpora) are in ``conftest.py``."""
