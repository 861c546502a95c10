"""Reading checkpoints, shared by the target and the draft: safetensors files and shard indexes
(``safetensors.py``), JSON files (``jsonfile.py``) and the typed, ranged config fields (``fields.py``)."""
