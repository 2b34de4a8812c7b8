"""Registrars publish view tables where readers look: AWS Glue, a Hive Metastore, plain paths.

One module per backend (glue, hive, filesystem) behind :mod:`catalog_api.registrars.base`; the
registration service (:mod:`catalog_api.registrars.service`) picks them through an explicit dict
of lazy loaders (boto3 and thrift load only when used) and runs the register loop.
"""
