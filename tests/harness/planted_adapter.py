"""The planted family's adapter: Z-Image's, unchanged (``tests/harness/planted.py``)."""
from backend.families.z_image.adapter import Adapter as ZImageAdapter


class Adapter(ZImageAdapter):
    pass
