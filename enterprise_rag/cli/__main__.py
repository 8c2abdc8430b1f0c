"""``python -m enterprise_rag.cli``: the same as the ``enterprise-rag`` console script."""

from enterprise_rag.cli.commands import main

main()
