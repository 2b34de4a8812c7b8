"""``lakeview init``: an example project (config + a sample data generator)."""

from __future__ import annotations

from pathlib import Path

from lakeview.config.models import PROJECT_FILE
from lakeview.errors import ConfigError

EXAMPLE_CONFIG = """\
# Lakeview project: sources are landing directories, views are SQL kept fresh incrementally.
# Reference: docs/configuration.md (every key), docs/sql.md (the SQL a view may use).

[lake]
warehouse = "lake"          # view tables, checkpoints and the SQLite catalog store live here
name = "lakeview"           # warehouse name = the REST catalog prefix

[server]
host = "127.0.0.1"          # loopback only until auth is configured
port = {port}

[sources.orders]
format = "json"             # json (one object per line), csv (with header) or parquet
path = "landing/orders"     # land files atomically: write elsewhere (or as .name), then rename
schema = "order_id BIGINT, product_id BIGINT, quantity INT, ts TIMESTAMP"

[views.sales_by_product]
sql = \"\"\"
SELECT product_id, SUM(quantity) AS total_sold, COUNT(*) AS orders
FROM orders
GROUP BY product_id
\"\"\"
format = "iceberg"
cadence = "{cadence}"            # one snapshot per tick at most; "manual" = only `lakeview refresh`
namespace = "analytics"
"""

GENERATOR = '''\
"""Land sample orders into landing/orders: python generate_orders.py [COUNT] [SEED]"""

import sys
import time
from pathlib import Path

from lakeview.cli.generator import land_json, make_orders

count = int(sys.argv[1]) if len(sys.argv) > 1 else 100
seed = int(sys.argv[2]) if len(sys.argv) > 2 else int(time.time())
landing = Path(__file__).parent / "landing" / "orders"
path = land_json(landing, f"orders-{time.time_ns()}.json", make_orders(count, seed=seed, first_id=seed * 1_000_000))
print(f"landed {count} orders in {path}")
'''


def init_project(directory: Path, *, port: int = 8181, cadence: str = "5s", force: bool = False) -> Path:
    """Write ``lakeview.toml`` and ``generate_orders.py`` into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / PROJECT_FILE
    if config.exists() and not force:
        raise ConfigError(str(config), "-", "a project already exists here; pass --force to overwrite it")
    config.write_text(EXAMPLE_CONFIG.format(port=port, cadence=cadence))
    (directory / "generate_orders.py").write_text(GENERATOR)
    (directory / "landing" / "orders").mkdir(parents=True, exist_ok=True)
    return config
