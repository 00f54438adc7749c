"""Commands that compose several layers (a sweep and the report's fit): `sweep --until-resolved`'s decisions."""
