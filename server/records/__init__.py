"""Request records: what a record looks like (``schema``), the draft filled in as a request is
understood, the privacy rules, the JSON line a finished draft becomes, the writer thread, and
the sinks the lines go to. The schema is documented in ``docs/records.md``.
"""
