"""The Iceberg REST catalog's routes under ``/iceberg/v1``, one module per resource."""
