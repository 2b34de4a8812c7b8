"""The browser console at ``/ui/``: static pages (``static/``) over JSON routes under ``/lakeview/v1``."""
