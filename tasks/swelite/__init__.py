"""The bundled offline suite `swe-lite`: small projects written for spectune, mutated into tasks."""
