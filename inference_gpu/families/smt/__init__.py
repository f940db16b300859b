"""The smt-transfer family on the node: its served model, the Thot engine in worker processes and word graphs."""
