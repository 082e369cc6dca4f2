from camelcase import camel_to_underscore


def test_camel_case():
    assert camel_to_underscore("someThing") == "some_thing"
    assert camel_to_underscore("HTTPResponse") == "http_response"


def test_pascal_case():
    assert camel_to_underscore("DatabaseList") == "database_list"
    assert camel_to_underscore("Ab") == "ab"


def test_leading_underscore_kept():
    assert camel_to_underscore("_privateKey") == "_private_key"
