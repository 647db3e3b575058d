// Prints what Apache Kafka's own classes say about every broker setting, one line each,
// tab-separated: name, type, default, update mode, minimum, maximum, valid values,
// flags. Run by regenerate.py against the reference broker's classpath.

import java.lang.reflect.Field;
import java.util.*;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.server.config.DynamicBrokerConfig;

public class DumpKafkaBrokerSettings {
    static Object field(Object o, String name) throws Exception {
        Field f = o.getClass().getDeclaredField(name);
        f.setAccessible(true);
        return f.get(o);
    }

    static String clean(Object o) {
        return o == null ? "" : String.valueOf(o).replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n");
    }

    public static void main(String[] args) throws Exception {
        ConfigDef def = kafka.server.KafkaConfig.configDef();
        Map<String, String> modes = DynamicBrokerConfig.dynamicConfigUpdateModes();
        Properties every = new Properties();
        for (String name : def.names()) every.put(name, "");
        Set<String> perBroker = DynamicBrokerConfig.perBrokerConfigs(every);
        Set<String> listenerOnly = DynamicBrokerConfig.securityConfigsWithoutListenerPrefix(every);
        for (ConfigDef.ConfigKey key : new TreeMap<>(def.configKeys()).values()) {
            String dflt = key.defaultValue == ConfigDef.NO_DEFAULT_VALUE ? "<required>"
                : key.defaultValue == null ? "<null>" : ConfigDef.convertToString(key.defaultValue, key.type);
            String min = "", max = "", choices = "";
            ConfigDef.Validator v = key.validator;
            if (v instanceof ConfigDef.Range) {
                min = clean(field(v, "min"));
                max = clean(field(v, "max"));
            } else if (v instanceof ConfigDef.ValidString) {
                choices = String.join(",", (List<String>) field(v, "validStrings"));
            } else if (v instanceof ConfigDef.ValidList) {
                Object valid = field(v, "validString");
                if (valid != null) choices = String.join(",", (List<String>) field(valid, "validStrings"));
            } else if (v instanceof ConfigDef.CaseInsensitiveValidString) {
                choices = String.join(",", (Collection<String>) field(v, "validStrings"));
            }
            List<String> flags = new ArrayList<>();
            if (perBroker.contains(key.name)) flags.add("per-broker-only");
            if (listenerOnly.contains(key.name)) flags.add("listener-prefix-only");
            if (key.internalConfig) flags.add("internal");
            if (v instanceof ConfigDef.ValidList) {
                flags.add("list-items-checked");
                if (!(Boolean) field(v, "isEmptyAllowed")) flags.add("list-not-empty");
            }
            if (v != null && min.isEmpty() && choices.isEmpty() && !(v instanceof ConfigDef.ValidList)) flags.add("validator:" + v.getClass().getSimpleName());
            System.out.println(String.join("\t", key.name, key.type.name(), clean(dflt),
                modes.getOrDefault(key.name, "read-only"), min, max, clean(choices), String.join(",", flags)));
        }
    }
}
