"""The seeded chaos suite: the whole system under injected failure, then PostgreSQL is checked.

python -m tests.chaos --seeds 20 --jobs 1200      # the long profile
pytest tests/chaos                                # the quick profile (3 seeds, 1,200 jobs)
"""
