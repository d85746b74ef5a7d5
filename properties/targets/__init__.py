"""``--target`` adapters for third-party kernel libraries: each module offers the functions of the
README's "Test your own kernel" contract that its library really has, calling the library's own
kernels, and refuses (NotImplementedError, its only SUITE_REFUSALS) just what the library
documents as unsupported.

* ``properties.targets.liger``: liger-kernel 0.8.5 (``pip install -e ".[liger]"``)
* ``properties.targets.fla``: fla-core 0.6.0 (``pip install -e ".[fla]"``)
"""
