"""Client webhooks: the durable outbox of build events (`outbox`), the address policy of payload
URLs (`addresses`) and the worker that delivers them (`delivery`)."""
