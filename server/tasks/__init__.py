"""Long-running tool calls that outlive their request: tasks, shared by both eras.

A tool declared with ``task_support`` may run as a *task*: the call answers at once with a task
handle, the handler runs on in this process, and the client polls (``tasks/get``), answers the
handler's questions (``tasks/update``; ``tasks/result`` in 2025-11-25) or cancels it
(``tasks/cancel``), on any replica. :mod:`~server.tasks.model` is the record and its wire forms,
:mod:`~server.tasks.store` the shared-state interface (flavours in :mod:`server.state`),
:mod:`~server.tasks.service` the runner (with :mod:`~server.tasks.running` the handlers it runs
here, :mod:`~server.tasks.leases` their leases, :mod:`~server.tasks.waits` the requests waiting
for a task), and :mod:`~server.tasks.exchange` what a handler's context talks through once it
runs as a task. Each era's wire is in ``modern/tasks.py`` and
``legacy/tasks.py``.
"""
