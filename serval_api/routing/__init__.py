"""Node sessions and the dispatcher that sends inference work to inference nodes."""
