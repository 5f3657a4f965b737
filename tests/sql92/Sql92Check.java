// Evaluates every case of tests/vectors/sql92.json with Apache RocketMQ's own filter module
// (rocketmq-filter 5.5.0: FilterFactory's SQL92 SqlFilter) and fails on any difference from the
// table, the same table core/tests/sql92.rs holds Rocklet to.
//
// Each case is evaluated as Apache's broker does (broker/filter/ExpressionMessageFilter): the
// compiled expression's evaluate() over the message's properties (MessageEvaluationContext is
// a lookup in the property map; a map-backed EvaluationContext here does the same without
// pulling in the broker). A compile exception is "parse-error", an exception during evaluation
// "failed", null "unknown". Where a case names what Apache gives ("java", a deliberate
// difference of Rocklet's), that is what Apache must give.
//
// Usage: java -cp <jars>:<classes> Sql92Check TABLE.json... [--bless]
// --bless writes Apache's outcomes into each case's "expect" instead (for the random table,
// tests/sql92/random_cases.py).
import com.alibaba.fastjson2.JSON;
import com.alibaba.fastjson2.JSONArray;
import com.alibaba.fastjson2.JSONObject;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;
import org.apache.rocketmq.filter.FilterFactory;
import org.apache.rocketmq.filter.FilterSpi;
import org.apache.rocketmq.filter.expression.EvaluationContext;
import org.apache.rocketmq.filter.expression.Expression;

public final class Sql92Check {
    private Sql92Check() {
    }

    static final class Props implements EvaluationContext {
        private final Map<String, Object> map;

        Props(Map<String, Object> map) {
            this.map = map;
        }

        @Override
        public Object get(String name) {
            return map.get(name);
        }

        @Override
        public Map<String, Object> keyValues() {
            return map;
        }
    }

    static String expression(JSONObject c) {
        JSONArray build = c.getJSONArray("build");
        if (build == null) {
            return c.getString("expr");
        }
        StringBuilder b = new StringBuilder();
        for (int i = 0; i < build.size(); i++) {
            JSONArray part = build.getJSONArray(i);
            String piece = part.getString(0);
            for (int n = part.getIntValue(1); n > 0; n--) {
                b.append(piece);
            }
        }
        return b.toString();
    }

    static String outcome(FilterSpi sql, String expr, Map<String, Object> props) {
        Expression e;
        try {
            e = sql.compile(expr);
        } catch (Throwable t) {
            return "parse-error";
        }
        Object r;
        try {
            r = e.evaluate(new Props(props));
        } catch (Throwable t) {
            return "failed";
        }
        if (r == null) {
            return "unknown";
        }
        if (r instanceof Boolean) {
            return ((Boolean) r) ? "true" : "false";
        }
        return "non-boolean " + r.getClass().getSimpleName();
    }

    public static void main(String[] args) throws Exception {
        boolean bless = Arrays.asList(args).contains("--bless");
        int failed = 0;
        for (String path : args) {
            if (!path.equals("--bless")) {
                failed += check(path, bless);
            }
        }
        System.exit(failed == 0 ? 0 : 1);
    }

    static int check(String path, boolean bless) throws Exception {
        String text = new String(Files.readAllBytes(Paths.get(path)), StandardCharsets.UTF_8);
        JSONObject table = JSON.parseObject(text);
        JSONArray cases = table.getJSONArray("cases");
        FilterSpi sql = FilterFactory.INSTANCE.get("SQL92");
        int failed = 0;
        int differ = 0;
        for (int i = 0; i < cases.size(); i++) {
            JSONObject c = cases.getJSONObject(i);
            String expr = expression(c);
            Map<String, Object> props = new HashMap<>();
            JSONObject p = c.getJSONObject("props");
            for (String k : p.keySet()) {
                props.put(k, p.getString(k));
            }
            String want = c.containsKey("java") ? c.getString("java") : c.getString("expect");
            if (c.containsKey("java")) {
                differ++;
            }
            String got = outcome(sql, expr, props);
            if (bless && !c.containsKey("java")) {
                c.put("expect", got);
            } else if (!got.equals(want)) {
                failed++;
                String shown = expr.length() > 80 ? expr.substring(0, 80) + "..." : expr;
                System.out.println(path + " case " + i + " " + JSON.toJSONString(shown) + " "
                    + JSON.toJSONString(props) + ": the table says " + want + ", Apache RocketMQ gives " + got);
            }
        }
        if (bless) {
            StringBuilder out = new StringBuilder("{\n");
            for (String k : table.keySet()) {
                if (!k.equals("cases")) {
                    out.append(' ').append(JSON.toJSONString(k)).append(": ")
                        .append(JSON.toJSONString(table.get(k))).append(",\n");
                }
            }
            out.append(" \"cases\": [\n");
            for (int i = 0; i < cases.size(); i++) {
                out.append("  ").append(JSON.toJSONString(cases.get(i)))
                    .append(i + 1 < cases.size() ? ",\n" : "\n");
            }
            out.append(" ]\n}\n");
            Files.write(Paths.get(path), out.toString().getBytes(StandardCharsets.UTF_8));
            System.out.println(path + ": " + cases.size() + " outcomes written from Apache RocketMQ's filter");
            return 0;
        }
        System.out.println(path + ": " + (cases.size() - failed) + " of " + cases.size()
            + " cases as the table says with Apache RocketMQ's filter (" + differ + " deliberate differences)");
        return failed;
    }
}
