-- A table with a column of every type in DESIGN.md's type mapping, shared by
-- the capture and Delta tests. The big column is stored out of line, so an
-- UPDATE that leaves it alone sends it as an unchanged TOAST value.
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE types (
	id   int8 PRIMARY KEY,
	b    bool, i2 int2, i4 int4, i8 int8, f4 float4, f8 float8,
	n    numeric(12,3), nu numeric,
	t    text, vc varchar(20), ch char(5), u uuid, j json, jb jsonb, e mood, iv interval, ip inet,
	ba   bytea, d date, ts timestamp, tstz timestamptz, tm time,
	ai   int4[], at text[], an numeric(6,2)[], atz timestamptz[],
	big  text
);
ALTER TABLE types ALTER COLUMN big SET STORAGE EXTERNAL;
