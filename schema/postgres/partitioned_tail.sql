
-- The partitions. The default partition takes every row no time partition
-- covers (a created_at far in the future, ±infinity, or a period whose
-- partition does not exist yet), so no insert ever fails; its rows are
-- claimed like any other and the relay moves them into their partition
-- when it creates it. Time partitions are named <table>_p<start in UTC>
-- and cover one {{partition_by}} in UTC; created here are the current one and
-- those starting within the next {{partition_ahead}}. The relay's retention
-- creates later ones ahead of time and drops those whose rows are all
-- delivered or dead and past retention.
DO $$
DECLARE
    step  interval := interval '1 {{partition_by}}';
    start timestamptz := date_trunc('{{partition_by}}', now(), 'UTC');
    part  text;
BEGIN
    IF to_regclass('{{schema}}"{{name}}_default"') IS NULL THEN
        CREATE TABLE {{schema}}"{{name}}_default" PARTITION OF {{table}} DEFAULT;
    END IF;
    WHILE start < now() + interval '{{partition_ahead}}' LOOP
        part := '{{name}}_p' || to_char(start AT TIME ZONE 'UTC', '{{partition_format}}');
        -- A period whose rows already wait in the default partition is
        -- left to the relay, which moves them.
        IF to_regclass(format('%s%I', '{{schema}}', part)) IS NULL AND NOT EXISTS (
            SELECT 1 FROM {{schema}}"{{name}}_default"
            WHERE created_at >= start AND created_at < start + step
        ) THEN
            EXECUTE format('CREATE TABLE %s%I PARTITION OF {{table}} FOR VALUES FROM (%L) TO (%L)',
                           '{{schema}}', part, start, start + step);
        END IF;
        start := start + step;
    END LOOP;
END
$$;
