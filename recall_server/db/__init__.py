"""Everything that touches PostgreSQL: the pool, the embedded server, migrations, queries."""
