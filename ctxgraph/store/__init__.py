"""The Store side of ctxgraph: the database, fact search and long-term memory.

Subpackages, lowest first: ``persistence`` (checkpointer, Store, embedded server, archive),
``search`` (tokenizer, BM25, indexes, hybrid fusion) and ``memory`` (repository, rules,
facts, queue); ``namespaces`` builds every Store namespace, and ``text_codec`` lets a
Store value hold any text.
"""
