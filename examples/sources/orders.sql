-- The example SQLite source (`orders-db` in ../deployment.yaml). `wfi up` creates the database
-- from this script when the file the connection names does not exist yet; insert rows into it
-- (sqlite3 examples/.wfi/sources/orders.db "INSERT INTO orders ...") and the pollers start their runs.

-- orders-poller: new orders; those of 1000 or more start a run, one customer at a time.
CREATE TABLE orders (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  customer_id TEXT NOT NULL,
  amount REAL NOT NULL,
  created_at TEXT NOT NULL
);
INSERT INTO orders (customer_id, amount, created_at) VALUES
  ('c-17', 120.00, '2026-11-30T09:12:00Z'),
  ('c-42', 1800.00, '2026-11-30T09:20:00Z'),
  ('c-17', 2450.50, '2026-11-30T10:02:00Z'),
  ('c-08', 75.25, '2026-11-30T10:45:00Z'),
  ('c-42', 1200.00, '2026-11-30T11:30:00Z');

-- inventory-sync: stock movements, polled in batches of up to 50 (or 1 minute).
CREATE TABLE stock_movements (
  seq INTEGER PRIMARY KEY,
  sku TEXT NOT NULL,
  quantity INTEGER NOT NULL,
  at TEXT NOT NULL
);
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 60)
INSERT INTO stock_movements (seq, sku, quantity, at)
SELECT i, 'sku-' || (i % 7), (i % 5) - 2, printf('2026-11-30T%02d:%02d:00Z', 8 + i / 60, i % 60) FROM n;
