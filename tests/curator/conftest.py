import json

import numpy as np
import pandas as pd
import pytest

SCHEMA = {
    "attributes": [
        {"name": "age", "type": "integer", "min": 0, "max": 99},
        {"name": "sex", "type": "categorical", "values": ["F", "M"]},
        {"name": "region", "type": "categorical", "values": ["north", "south", "east", "west"]},
    ]
}


@pytest.fixture
def people(tmp_path):
    """A real CSV file of 2,000 generated people and its schema file."""
    rng = np.random.default_rng(7)
    n = 2000
    df = pd.DataFrame(
        {
            "age": rng.integers(0, 100, n),
            "sex": rng.choice(["F", "M"], n),
            "region": rng.choice(["north", "south", "east", "west"], n),
        }
    )
    data = tmp_path / "people.csv"
    df.to_csv(data, index=False)
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    return data, schema, df
