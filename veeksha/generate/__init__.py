"""What to send: sessions generated deterministically from a scenario's seed (no I/O).

Modules (imported individually, so that importing one stays cheap):

* ``rng``: ``RandomStreams``, named independent random streams from one seed;
* ``distributions``: interval and length samplers;
* ``graphs``: session graph generators (single_request, linear, branching);
* ``tokenizer``: builtin, hf and server tokenizers, ``make_tokenizer``;
* ``content``: prompt bodies of a target token count and the shared prefix;
* ``sessions``: ``SessionGenerator``, the sessions of a scenario;
* ``spec``: ``NodeSpec`` and ``SessionSpec``, the output contract.

Nothing here imports the runtime (schedule, dispatch, record, engine, simulator).
"""
