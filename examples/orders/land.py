"""Land COUNT sample orders into examples/orders/landing/orders: python land.py [COUNT]"""

import sys
import time
from pathlib import Path

from lakeview.cli.generator import land_json, make_orders

count = int(sys.argv[1]) if len(sys.argv) > 1 else 100
seed = time.time_ns() % 1_000_000
path = land_json(
    Path(__file__).parent / "landing" / "orders",
    f"orders-{time.time_ns()}.json",
    make_orders(count, seed=seed, first_id=seed * 1000),
)
print(f"landed {count} orders in {path}")
