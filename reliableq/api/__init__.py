"""ReliableQ's HTTP API (Django REST framework): jobs, stats, schema."""
