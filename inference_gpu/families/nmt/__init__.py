"""The NMT family on the node: its served model, backends, results and word graphs."""
