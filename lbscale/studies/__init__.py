"""Commands that compose several layers: a study of its own (branch: the local critical batch), the data filter, the
gns measurement of a checkpoint, and `sweep --until-resolved`'s decisions from the report's fit."""
