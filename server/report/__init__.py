"""The client report: reads records (files or a Redis stream) and shows, per client, what it
declared and what it actually asked for, as a table, JSON or HTML. Reads nothing of the
server but the record schema.
"""
